"""Node checks: pure rules over evidence (rules.py). certify and scan apply them through
gpuboot/engine.py; test_node.py is the pytest-testinfra module that applies the same
rules for molecule's verifier or an operator's own `pytest --hosts`."""
