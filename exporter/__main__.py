import sys

from exporter.daemon.cli import main

sys.exit(main())
