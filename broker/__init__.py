"""The content-based publish/subscribe overlay: language, matching, routing and transport."""
