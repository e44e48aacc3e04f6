"""``burstctl``: the admin's command line. One module a topic; ``app.py`` wires them."""
