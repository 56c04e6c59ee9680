// An invalid configuration variable: `orbit` prints its message and exits 1. Messages
// name the variable and never echo a database password.
export class ConfigError extends Error {}
