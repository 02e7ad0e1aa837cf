"""The conformance suite under pytest (the plugin in conformance/plugin.py parametrizes it):

    pytest --pyargs moecert.conformance --moecert-suite smoke [--moecert-backend NAME]
"""

from moecert.conformance.plugin import run_and_assert


def test_case(moecert_case, moecert_session, request):
    run_and_assert(moecert_case, moecert_session, request.node.user_properties)
