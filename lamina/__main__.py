"""``python -m lamina`` is the ``lamina`` command."""

import sys

from lamina.cli.main import main

sys.exit(main())
