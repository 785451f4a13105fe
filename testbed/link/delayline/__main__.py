"""``python -m testbed.link.delayline --config FILE``: the process the userspace backend starts."""

import sys

from testbed.link.delayline.line import main

sys.exit(main())
