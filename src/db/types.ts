export type { Pool, PoolConnection as Tx } from "mysql2/promise";
