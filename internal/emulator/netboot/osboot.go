package netboot

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	"github.com/metalhub/metalhub/internal/discovery"
	"github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/metadata"
)

// osBoot plays the boot of a claimed server's own boot configuration: the boot provider hands
// the machine the token of spec.metadataTokenSecretRef (a kernel argument, say), and the OS
// reads GET /metadata and GET /user-data with it, from whatever address it has. ok is false
// when the system's Server boots no claim's configuration (a discovery boot follows).
func (n *Netboot) osBoot(ctx context.Context, ev redfish.BootEvent) (Result, bool) {
	uuid := ev.UUID
	res := Result{UUID: uuid, OS: true}
	srv, err := n.serverFor(ctx, uuid)
	if err != nil || srv == nil {
		return res, false
	}
	res.Server = srv.Name
	ref := srv.Spec.BootConfigurationRef
	if srv.Spec.ServerClaimRef == nil || ref == nil || ref.Name == "" ||
		(ref.Namespace == n.opts.Namespace && ref.Name == discovery.ObjectName(srv.Name)) {
		return res, false
	}
	var sbc metalv1alpha1.ServerBootConfiguration
	if err := n.opts.Client.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &sbc); err != nil {
		res.Err = fmt.Errorf("reading the boot configuration %s/%s: %w", ref.Namespace, ref.Name, err)
		return res, true
	}
	if sbc.Spec.ServerRef.Name != srv.Name {
		res.Err = fmt.Errorf("boot configuration %s/%s is for server %q", ref.Namespace, ref.Name, sbc.Spec.ServerRef.Name)
		return res, true
	}
	if n.opts.TenantData {
		if err := n.writeTenantData(n.hardware(uuid, ev.SerialNumber, ev.MACs)); err != nil {
			res.Err = err
			return res, true
		}
	}
	token := ""
	if tr := sbc.Spec.MetadataTokenSecretRef; tr != nil && tr.Name != "" {
		var sec corev1.Secret
		if err := n.opts.Client.Get(ctx, client.ObjectKey{Namespace: sbc.Namespace, Name: tr.Name}, &sec); err != nil {
			res.Err = fmt.Errorf("reading the metadata token Secret %s/%s: %w", sbc.Namespace, tr.Name, err)
			return res, true
		}
		token = string(sec.Data[metadata.TokenKey])
	}
	// An OS retries its metadata, as Ignition does: the service may not know the token yet (the
	// claim's record reaches its cache a moment after the binding) or be restarting.
	ctx, cancel := context.WithTimeout(ctx, n.opts.LookupTimeout)
	defer cancel()
	for {
		if res.Metadata, res.Err = n.fetch(ctx, "/metadata", token); res.Err == nil {
			res.UserData, res.Err = n.fetch(ctx, "/user-data", token)
		}
		if res.Err == nil {
			return res, true
		}
		select {
		case <-ctx.Done():
			return res, true
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// fetch is the OS's request to the metadata service: the flavor header always, the token when
// the boot configuration handed it one.
func (n *Netboot) fetch(ctx context.Context, path, token string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(n.opts.MetadataURL, "/")+path, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	req.Header.Set(metadata.FlavorHeader, metadata.Flavor)
	if token != "" {
		req.Header.Set(metadata.TokenHeader, token)
	}
	resp, err := n.opts.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: reading the answer: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}
