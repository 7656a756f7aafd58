"""Who may do what on NATS: keys, credentials, permissions, TLS."""
