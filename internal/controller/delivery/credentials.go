package delivery

import (
	"context"
	"errors"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/infrahub"
	"github.com/metalhub/metalhub/internal/lifecycle"
)

// Keys read from an Infrahub credentials Secret. An API token (sent as X-INFRAHUB-KEY) needs no
// login and wins over a username/password pair; ca.crt, when present, is the only CA trusted.
var (
	tokenKeys    = []string{"token", "api-token"}
	usernameKeys = []string{"username"}
	passwordKeys = []string{"password"}
	caKeys       = []string{"ca.crt"}
)

// credentials finds the Secret for an Infrahub URL and turns it into a client configuration.
type credentials struct {
	reader  client.Reader // cache of Secrets labelled infrahub-api-url
	scope   secretScope
	timeout time.Duration
}

// config returns the client configuration for rawURL. The Secret's content never appears in
// errors or logs; its name does.
func (c *credentials) config(ctx context.Context, rawURL string) (infrahub.Config, error) {
	s, err := findLabelledSecret(ctx, c.reader, c.scope, infrahubv1alpha1.InfrahubAPIURLLabel, rawURL, infrahubv1alpha1.ReasonCredentialsNotFound)
	if err != nil {
		return infrahub.Config{}, err
	}
	cfg := infrahub.Config{
		URL:      rawURL,
		APIToken: secretValue(s, tokenKeys...),
		Username: secretValue(s, usernameKeys...),
		Password: secretValue(s, passwordKeys...),
		CABundle: s.Data[caKeys[0]],
		Timeout:  c.timeout,
	}
	if cfg.APIToken == "" && (cfg.Username == "" || cfg.Password == "") {
		return infrahub.Config{}, lifecycle.WithReason(infrahubv1alpha1.ReasonCredentialsInvalid,
			errors.New("Secret "+s.Namespace+"/"+s.Name+" holds neither token/api-token nor username and password"))
	}
	return cfg, nil
}
