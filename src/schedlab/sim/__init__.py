"""The ``sim`` backend: schedlab's own fast discrete-event engine."""
