package wire

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/go-logr/logr"
	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

// Conn is what a service package needs of the facade's connection to one BMC. The facade
// owns the session, the concurrency cap, the breaker and the fence; a service package only
// asks for a client and reads through it.
type Conn interface {
	// Client is the gofish client for requests made under ctx.
	Client(ctx context.Context) (*gofish.APIClient, error)
	// System reads one ComputerSystem by Id (or @odata.id), its identity proven.
	System(ctx context.Context, systemID string) (*schemas.ComputerSystem, error)
	// Root holds the links read from the service root.
	Root() *Root
	// Log is the connection's logger.
	Log() logr.Logger
}

// Root holds the links we need from /redfish/v1.
type Root struct {
	Systems        Link
	Managers       Link
	SessionService Link
	AccountService Link
	UpdateService  Link
	Tasks          Link // the TaskService
	EventService   Link
	// CertificateService is absent on older BMCs.
	CertificateService Link
	Links              struct {
		Sessions Link
	}
}

// Link is a Redfish reference.
type Link struct {
	ID string `json:"@odata.id"`
}

type ctxKey int

const streamKey ctxKey = 1

// WithStream marks an upload whose length nobody can bound ahead: its fence cuts it when the
// right to act could pass, instead of refusing it at the start. A BMC acts on an upload only once
// it arrived whole.
func WithStream(ctx context.Context) context.Context {
	return context.WithValue(ctx, streamKey, true)
}

// IsStream reports whether ctx carries an upload marked by WithStream.
func IsStream(ctx context.Context) bool {
	stream, _ := ctx.Value(streamKey).(bool)
	return stream
}

// GetJSON GETs uri through gofish and decodes the body into v.
func GetJSON(api *gofish.APIClient, uri string, v any) error {
	resp, err := api.Get(uri)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("decode %s: %w", uri, err)
	}
	return nil
}

// LastSegment returns the final path segment of an @odata.id.
func LastSegment(p string) string {
	p = strings.TrimRight(p, "/")
	if i := strings.LastIndex(p, "/"); i >= 0 {
		p = p[i+1:]
	}
	if u, err := url.PathUnescape(p); err == nil {
		return u
	}
	return p
}

// PathOf reduces an absolute URL (some BMCs answer Location with one) to its path.
func PathOf(uri string) string {
	if u, err := url.Parse(uri); err == nil && u.IsAbs() {
		return u.RequestURI()
	}
	return uri
}

// ManagedBy is the manager a system's Links.ManagedBy names first ("" when none), read from
// the system's raw body since gofish keeps links unexported.
func ManagedBy(raw []byte) string {
	var links struct {
		Links struct{ ManagedBy []Link }
	}
	_ = json.Unmarshal(raw, &links)
	if len(links.Links.ManagedBy) == 0 {
		return ""
	}
	return links.Links.ManagedBy[0].ID
}

// FirstManager is the service's first manager (by @odata.id), the one Manager describes.
func FirstManager(api *gofish.APIClient, root *Root) (string, error) {
	if root.Managers.ID == "" {
		return "", New(ReasonNotFound, "read manager", "service root has no Managers collection")
	}
	coll, err := schemas.GetCollection(api, root.Managers.ID)
	if err != nil {
		return "", err
	}
	if len(coll.ItemLinks) == 0 {
		return "", New(ReasonNotFound, "read manager", "Managers collection is empty")
	}
	links := slices.Clone(coll.ItemLinks)
	sort.Strings(links)
	return links[0], nil
}
