# Orbit's server as a container image (docs/operations.md#a-container-image).
# Stage 1 builds and packs the server package; stage 2 installs that package with
# production dependencies only, as `npm install` of the tarball does anywhere else.
FROM node:20-bookworm-slim AS build
WORKDIR /src
COPY package.json package-lock.json ./
COPY packages/sdk/package.json packages/sdk/
RUN npm ci --no-audit --no-fund
COPY . .
RUN npm run build:server && mkdir /pkg && npm pack --ignore-scripts --pack-destination /pkg

FROM node:20-bookworm-slim
ENV NODE_ENV=production \
    ORBIT_HOST=0.0.0.0 \
    ORBIT_PORT=8080
COPY --from=build /pkg/ /tmp/pkg/
RUN npm install --global --omit=dev --no-audit --no-fund /tmp/pkg/*.tgz && rm -rf /tmp/pkg /root/.npm
# The image's own unprivileged user; the node needs no file it writes.
USER node
EXPOSE 8080
# Liveness only (no database access): a balancer checks /readyz itself.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s \
    CMD ["node", "-e", "fetch('http://127.0.0.1:8080/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# SIGTERM drains within 11 s: give `docker stop` more (--time 15 / stop_grace_period).
STOPSIGNAL SIGTERM
CMD ["orbit", "serve"]
