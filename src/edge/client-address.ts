// Who a request came from, for the access log. Behind a proxy the TCP peer is the proxy;
// the client is in X-Forwarded-For, which anyone can write. So the header is read only
// from trusted proxies (ORBIT_TRUSTED_PROXIES): from its right end, each entry a trusted
// proxy appended, skipping the addresses of trusted proxies; the first other address is
// the client. An entry a trusted proxy vouched for that is no address ends the walk at
// the last address read: nothing left of it can be believed.
import net from "node:net";
import type { IncomingMessage } from "node:http";
import type { Subnet } from "../config/index.js";

export type ClientAddress = (req: IncomingMessage) => string | undefined;

export function clientAddressOf(trusted: readonly Subnet[]): ClientAddress {
  const list = new net.BlockList();
  for (const s of trusted) list.addSubnet(s.address, s.prefix, s.family);
  const isTrusted = (address: string) => {
    try {
      return list.check(address, net.isIP(address) === 6 ? "ipv6" : "ipv4");
    } catch {
      return false; // an address BlockList cannot read (a zone index): not a proxy of ours
    }
  };
  return (req) => {
    const peer = req.socket.remoteAddress;
    if (peer === undefined) return undefined;
    let client = plain(peer);
    if (trusted.length === 0 || !isTrusted(client)) return client;
    const forwarded = req.headersDistinct["x-forwarded-for"] ?? [];
    const hops = forwarded.join(",").split(",");
    for (let i = hops.length - 1; i >= 0; i--) {
      const hop = hopAddress(hops[i]!);
      if (hop === undefined) break;
      client = hop;
      if (!isTrusted(hop)) break;
    }
    return client;
  };
}

/** An IPv4-mapped IPv6 address (::ffff:10.0.0.1, as a dual-stack listener reports IPv4 peers) as IPv4. */
function plain(address: string): string {
  const m = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  return m ? m[1]! : address;
}

/** One X-Forwarded-For entry: an address, or one with a port (1.2.3.4:80, [::1]:80); undefined if it is none. */
function hopAddress(entry: string): string | undefined {
  const e = entry.trim();
  const m = /^\[([^\]]+)\](?::(\d{1,5}))?$/.exec(e) ?? /^(\d+\.\d+\.\d+\.\d+):(\d{1,5})$/.exec(e);
  if (m?.[2] !== undefined && Number(m[2]) > 65535) return undefined;
  const address = m ? m[1]! : e;
  return net.isIP(address) === 0 ? undefined : plain(address);
}
