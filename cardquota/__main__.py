import sys

from cardquota.cli.main import main

sys.exit(main())
