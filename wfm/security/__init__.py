"""The workflow layer's security: the access rules of its roles (more in docs/security.md)."""
