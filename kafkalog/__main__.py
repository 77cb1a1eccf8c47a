import sys

from kafkalog.cli import main

sys.exit(main())
