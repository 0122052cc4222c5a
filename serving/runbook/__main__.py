import sys

from serving.runbook.cli import main

sys.exit(main())
