"""The content-based publish/subscribe overlay: language, matching, routing and transport."""

from broker import compiled

compiled.choose()  # before any module of the compiled group is imported: which build to run
