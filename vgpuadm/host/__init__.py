"""Everything that reads the real (or simulated) host: sysfs access and discovery."""
