"""`python -m gputrace run -- python train.py`: the installed `gputrace` command."""

import sys

from . import main

sys.exit(main())
