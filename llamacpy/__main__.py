import sys

from llamacpy.cli.main import main

sys.exit(main())
