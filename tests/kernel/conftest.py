"""The real-kernel lane (tests/kernel/run-lane.sh). Loading this conftest puts tests/kernel on sys.path, so the
guest suite and the host-side comparison share tests/kernel/differential_scenario.py."""
