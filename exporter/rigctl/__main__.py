import sys

from exporter.rigctl import main

sys.exit(main())
