"""``python -m testbed.vm [OPTIONS] -- CMD``: the guest runner without the rest of the CLI."""

import sys

from testbed.vm.cli import main

sys.exit(main())
