"""What one trial trains: arms expanded from the config, designed arm sets and their paired gains, the memory check."""
