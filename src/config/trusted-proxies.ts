// ORBIT_TRUSTED_PROXIES: the proxies whose X-Forwarded-For a node believes
// (edge/client-address.ts). A comma list of IP addresses, CIDR blocks and the keyword
// `loopback`; parsed here so that a bad entry stops the node at start-up.
import net from "node:net";
import { ConfigError } from "./errors.js";

export interface Subnet {
  readonly address: string;
  readonly prefix: number;
  readonly family: "ipv4" | "ipv6";
}

/** `loopback`: 127.0.0.0/8 and ::1, the proxy on this machine. */
const LOOPBACK: readonly Subnet[] = [
  { address: "127.0.0.0", prefix: 8, family: "ipv4" },
  { address: "::1", prefix: 128, family: "ipv6" },
];

export function parseTrustedProxies(raw: string | undefined): readonly Subnet[] {
  if (raw === undefined || raw.trim() === "") return [];
  const subnets: Subnet[] = [];
  for (const item of raw.split(",")) {
    const entry = item.trim();
    if (entry === "loopback") {
      subnets.push(...LOOPBACK);
      continue;
    }
    const m = /^([^/]+)(?:\/([0-9]{1,3}))?$/.exec(entry);
    const version = m ? net.isIP(m[1]!) : 0;
    const max = version === 4 ? 32 : 128;
    const prefix = m?.[2] === undefined ? max : Number(m[2]);
    if (!m || version === 0 || prefix > max || (m[2] !== undefined && !/^(0|[1-9][0-9]*)$/.test(m[2])))
      throw new ConfigError(
        `ORBIT_TRUSTED_PROXIES must be a comma list of IP addresses, CIDR blocks (10.0.0.0/8, fd00::/8) and loopback, got ${JSON.stringify(entry)}`,
      );
    subnets.push({ address: m[1]!, prefix, family: version === 4 ? "ipv4" : "ipv6" });
  }
  return subnets;
}
