"""``python -m bench [--quick]``: the freshness gate benchmark."""

from bench.freshness import main

raise SystemExit(main())
