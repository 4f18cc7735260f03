"""Events: what changed in a series of builds (started, finished, broke, recovered, got slower), derived as builds
are written, read from the feed (`GET /events`) and delivered to webhooks."""
