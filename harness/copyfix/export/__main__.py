import sys

from copyfix.export import main

sys.exit(main())
