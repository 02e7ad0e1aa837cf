"""The pytest plugin lived here until issue 35; it is conformance/plugin.py now (a front end
beside the command line). An install made before then names this module in its `pytest11`
entry point: this name is that same module object, so the plugin registers once whichever
name loads it."""

import sys

from .. import plugin as _plugin

sys.modules[__name__] = _plugin
