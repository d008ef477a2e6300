import sys

from ddpsim.cli import main

sys.exit(main())
