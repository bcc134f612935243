"""``python -m wfm.cli``: how ``wfm up`` starts its children with its own interpreter."""

import sys

from wfm.cli import main

sys.exit(main())
