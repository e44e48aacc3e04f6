"""The control API, the daemon's edge: ``app.create_app`` (routes), ``auth`` (rights), ``server`` (transport). It may
import the daemon; the daemon imports it only in its composition root (``burstd.daemon.main``)."""
