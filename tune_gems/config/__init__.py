"""The run config: its pydantic schema, YAML I/O and overrides, the arms section, the key listing."""
