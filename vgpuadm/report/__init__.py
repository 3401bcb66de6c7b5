"""Read-only views of a host: JSON-ready rows for `gpus`, `types`, `devices` and (later) the inventory. Pure."""
