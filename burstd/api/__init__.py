"""The control API, the daemon's edge: ``app.create_app`` composes the routers (one per audience, ``routers/``),
the request models (``models``), the rights (``auth``) and the transport (``server``). It may import the daemon;
the daemon imports it only in its composition root (``burstd.daemon.main``)."""
