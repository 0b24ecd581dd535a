"""pytest plugin: ``pytest --fp4spec-backend module:Name`` (registered through the pytest11 entry point)."""


def pytest_addoption(parser):
    group = parser.getgroup("fp4spec")
    group.addoption("--fp4spec-backend", action="store", default=None,
                    help="run the fp4spec conformance suite against this backend (name or module:Name)")
