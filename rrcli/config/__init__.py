"""Configuration: the profile types, the schema that checks a profile, the base_url address
policy, and the starter profile of `rrcli init`. Pure: no network I/O but the DNS look-up of the
address policy."""
