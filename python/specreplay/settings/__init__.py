"""A run's configuration: the typed config, config files, TOML reading, distributions."""
