"""The host kernel's facilities: entering namespaces, opening paths safely."""
