from burstd.data.cli import main

raise SystemExit(main())
