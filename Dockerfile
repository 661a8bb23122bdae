# metalhub and metalprobe, built from source in a Go stage, shipped in images from scratch.
#
#   make docker-build                       the operator image (IMG, default metalhub:latest)
#   make docker-build-check                 no Docker engine: run the build stage's commands here
#   docker build --target metalprobe .      the discovery agent's image (--probe-image)
#
# `make docker-build-check` (part of `make test`) interprets the build stage below — its ARG,
# ENV, WORKDIR, COPY and RUN lines — in a directory holding only what the COPY lines copy, so
# keep the stage to those instructions.
ARG GO_IMAGE=golang:1.26

FROM ${GO_IMAGE} AS build
ARG VERSION=dev
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY config/crd/ config/crd/
COPY config/webhook/ config/webhook/
COPY internal/ internal/
RUN go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/metalhub ./cmd/metalhub
RUN go build -trimpath -ldflags "-s -w" -o /out/metalprobe ./cmd/metalprobe

# The discovery agent, started by the discovery ignition with podman --privileged on the server
# being discovered. It runs as root there: the DMI files it reads (product_uuid,
# product_serial) are readable by root only.
FROM scratch AS metalprobe
COPY --from=build /out/metalprobe /metalprobe
ENTRYPOINT ["/metalprobe"]

# The operator (the default target). CA certificates for BMCs and Infrahub over HTTPS.
FROM scratch AS metalhub
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/metalhub /metalhub
COPY --from=build /out/metalprobe /metalprobe
USER 65532:65532
ENTRYPOINT ["/metalhub"]
