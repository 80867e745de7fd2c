"""``python -m distprof.live``: a rank's side process (the view, or its node's sender)."""

from .view import main

raise SystemExit(main())
