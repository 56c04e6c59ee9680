// A raw HTTP client: exact bytes in, status, headers and parsed envelope out. Unlike
// fetch it can send duplicate headers, bodies on GET and malformed content.
import http from "node:http";

export interface RawResponse {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly text: string;
  /** The parsed body; undefined when it is empty or not JSON. */
  readonly json: any;
}

export interface RawRequest {
  readonly method?: string;
  readonly path: string;
  /** Header pairs, in order; a name may repeat. */
  readonly headers?: readonly [string, string][];
  readonly token?: string;
  readonly body?: string | Buffer;
}

export function request(baseUrl: string, r: RawRequest): Promise<RawResponse> {
  const u = new URL(baseUrl);
  // Raw header arrays get no automatic Host header.
  const headers: string[] = ["Host", u.host];
  if (r.token !== undefined) headers.push("Authorization", `Bearer ${r.token}`);
  for (const [k, v] of r.headers ?? []) headers.push(k, v);
  const given = (name: string) => (r.headers ?? []).some(([k]) => k.toLowerCase() === name);
  if (r.body !== undefined && !given("content-type")) headers.push("Content-Type", "application/json");
  // Framed always: Node's client sends a GET's body unframed (it chunks only other
  // methods' bodies by default), which the server reads as a second, malformed request.
  if (r.body !== undefined && !given("content-length") && !given("transfer-encoding"))
    headers.push("Content-Length", String(Buffer.byteLength(r.body)));
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: u.hostname, port: u.port, method: r.method ?? "GET", path: r.path, headers, agent: false },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          let json: unknown;
          try {
            json = text ? JSON.parse(text) : undefined;
          } catch {
            json = undefined;
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json });
        });
      },
    );
    req.on("error", reject);
    if (r.body !== undefined) req.write(r.body);
    req.end();
  });
}
