"""Pure planners: placement, guest changes, the desired-state diff (apply -f), restore order, reconcile."""
