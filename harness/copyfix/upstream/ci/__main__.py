"""``python -m copyfix.upstream.ci``: see the package's docstring."""

import sys

from copyfix.upstream.ci import main

sys.exit(main())
