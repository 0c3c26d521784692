# The ferry daemon and CLI as a container image: a static binary (no cgo)
# on a distroless base, run as a non-root user.
#
#   docker build -t ferry:dev --build-arg VERSION=v0.1.0 .
#   docker run --rm ferry:dev version
#   docker run --rm -e FERRY_DATABASE_URL=... -e FERRY_BROKER_URL=... -p 9090:9090 ferry:dev relay --http-addr :9090
#
# GO_IMAGE and BASE_IMAGE name the builder and the base; docs/deploy.md
# ("The image") says how CI builds this file without a registry.
ARG GO_IMAGE=golang:1.26
ARG BASE_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${GO_IMAGE} AS build
WORKDIR /src
# The workspace (go.work) ties the modules: the command builds from this
# tree, whatever versions its go.mod names.
COPY . .
ARG VERSION=
# GOPROXY: a module proxy of yours, or off when the module cache is
# mounted (as CI does).
ARG GOPROXY=https://proxy.golang.org,direct
# -s leaves out the symbol table and DWARF (a smaller image; panics still
# print their stacks). GOFLAGS takes a value with spaces quoted.
ENV CGO_ENABLED=0 GOPROXY=${GOPROXY} GOFLAGS="-trimpath -buildvcs=false '-ldflags=-s -X=main.version=${VERSION}'"
# The exec form: no shell needed in the builder.
RUN ["go", "build", "-o", "/out/ferry", "./cmd/ferry"]

FROM ${BASE_IMAGE}
COPY --from=build /out/ferry /usr/local/bin/ferry
# distroless's nonroot user; any non-root uid works (the binary writes no file).
USER 65532:65532
# ferry relay --http-addr :9090 serves /metrics, /healthz and /readyz here.
EXPOSE 9090
ENTRYPOINT ["/usr/local/bin/ferry"]
CMD ["relay", "--http-addr", ":9090"]
