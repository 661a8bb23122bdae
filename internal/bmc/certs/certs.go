package certs

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/metalhub/metalhub/internal/bmc/wire"
	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

var (
	// ErrNoCertificateService matches the failure of a BMC without a CertificateService (older
	// BMCs: 404, or none in the service root) or without an HTTPS certificate it shows. Its
	// Reason is ReasonUnsupported: the certificate must be changed out of band.
	ErrNoCertificateService = errors.New("BMC has no CertificateService")
	// ErrCertificateRefused matches a ReplaceCertificate the BMC refused (400): most often a
	// certificate whose key is not the BMC's pending one, signed for an earlier request that a
	// later GenerateCSR replaced. Its Reason is ReasonRejected; the error carries the BMC's
	// message. Generate a new request and have it signed.
	ErrCertificateRefused = errors.New("BMC refused the certificate")
)

// Certificate is one HTTPS certificate of a BMC. The fields come from the certificate itself
// where the BMC shows it (CertificateString), else from what the resource says.
type Certificate struct {
	// URI is the Certificate resource, the CertificateUri of a ReplaceCertificate.
	URI string `json:"uri"`
	// Collection is the certificate collection it is in, the CertificateCollection of a
	// GenerateCSR.
	Collection string `json:"collection"`
	// PEM is the certificate as the BMC shows it (its chain, leaf first, on some BMCs).
	PEM     string `json:"pem,omitempty"`
	Subject Name   `json:"subject"`
	Issuer  Name   `json:"issuer"`
	// AlternativeNames are the subject's DNS names and IP addresses.
	AlternativeNames []string  `json:"alternativeNames,omitempty"`
	NotBefore        time.Time `json:"notBefore"`
	NotAfter         time.Time `json:"notAfter"`
	// SerialNumber is hex, lower case, without separators, as is Fingerprint (SHA-256 of the
	// certificate where the PEM is shown, else the BMC's with its FingerprintHashAlgorithm).
	SerialNumber             string   `json:"serialNumber,omitempty"`
	Fingerprint              string   `json:"fingerprint,omitempty"`
	FingerprintHashAlgorithm string   `json:"fingerprintHashAlgorithm,omitempty"`
	KeyUsage                 []string `json:"keyUsage,omitempty"`
	// X509 is the parsed leaf (nil when the BMC does not show the certificate).
	X509 *x509.Certificate `json:"-"`
}

// Name is a certificate's subject or issuer.
type Name struct {
	CommonName         string `json:"commonName,omitempty"`
	Organization       string `json:"organization,omitempty"`
	OrganizationalUnit string `json:"organizationalUnit,omitempty"`
	City               string `json:"city,omitempty"`
	State              string `json:"state,omitempty"`
	Country            string `json:"country,omitempty"`
}

// CSRRequest is what a GenerateCSR asks the BMC for. CommonName is required; many BMCs also
// insist on City, State, Country (two letters), Organization and OrganizationalUnit.
type CSRRequest struct {
	// Collection is the certificate collection the certificate goes to ("": the BMC's HTTPS
	// certificates).
	Collection         string   `json:"collection,omitempty"`
	CommonName         string   `json:"commonName"`
	AlternativeNames   []string `json:"alternativeNames,omitempty"`
	Organization       string   `json:"organization,omitempty"`
	OrganizationalUnit string   `json:"organizationalUnit,omitempty"`
	City               string   `json:"city,omitempty"`
	State              string   `json:"state,omitempty"`
	Country            string   `json:"country,omitempty"`
	Email              string   `json:"email,omitempty"`
	// KeyPairAlgorithm ("TPM_ALG_ECDSA", "TPM_ALG_RSA"), KeyBitLength (RSA) and KeyCurveID
	// ("TPM_ECC_NIST_P256", ...) choose the key; unset, the BMC chooses.
	KeyPairAlgorithm string `json:"keyPairAlgorithm,omitempty"`
	KeyBitLength     int    `json:"keyBitLength,omitempty"`
	KeyCurveID       string `json:"keyCurveId,omitempty"`
}

// unsupported is the failure of a BMC without what op needs.
func unsupported(op, format string, args ...any) error {
	return &wire.Error{Reason: wire.ReasonUnsupported, Op: op, Err: fmt.Errorf("%w: "+format, append([]any{ErrNoCertificateService}, args...)...)}
}

// httpsCollections are the BMC's HTTPS certificate collections: its manager's
// NetworkProtocol's, else those its CertificateLocations name.
func httpsCollections(ctx context.Context, c wire.Conn, op string) ([]string, error) {
	api, err := c.Client(ctx)
	if err != nil {
		return nil, err
	}
	mgr, err := wire.FirstManager(api, c.Root())
	if err != nil {
		return nil, err
	}
	var m struct{ NetworkProtocol wire.Link }
	if err := wire.GetJSON(api, mgr, &m); err != nil {
		return nil, err
	}
	if m.NetworkProtocol.ID != "" {
		var np struct {
			HTTPS struct{ Certificates wire.Link }
		}
		if err := wire.GetJSON(api, m.NetworkProtocol.ID, &np); err != nil && wire.ReasonOf(err) != wire.ReasonNotFound {
			return nil, err
		}
		if np.HTTPS.Certificates.ID != "" {
			return []string{np.HTTPS.Certificates.ID}, nil
		}
	}
	svc, err := service(api, c, op)
	if err != nil {
		return nil, err
	}
	if svc.CertificateLocations.ID == "" {
		return nil, unsupported(op, "no HTTPS certificates shown")
	}
	var loc struct {
		Links struct{ Certificates []wire.Link }
	}
	if err := wire.GetJSON(api, svc.CertificateLocations.ID, &loc); err != nil {
		return nil, err
	}
	var out []string
	for _, l := range loc.Links.Certificates {
		if i := strings.LastIndex(l.ID, "/NetworkProtocol/HTTPS/Certificates/"); i >= 0 {
			coll := l.ID[:i] + "/NetworkProtocol/HTTPS/Certificates"
			if !slices.Contains(out, coll) {
				out = append(out, coll)
			}
		}
	}
	if len(out) == 0 {
		return nil, unsupported(op, "no HTTPS certificates among its CertificateLocations")
	}
	return out, nil
}

type serviceBody struct {
	CertificateLocations wire.Link
	Actions              struct {
		GenerateCSR        schemas.ActionTarget `json:"#CertificateService.GenerateCSR"`
		ReplaceCertificate schemas.ActionTarget `json:"#CertificateService.ReplaceCertificate"`
	}
}

// service reads the CertificateService; ErrNoCertificateService where there is none.
func service(api *gofish.APIClient, c wire.Conn, op string) (*serviceBody, error) {
	uri := c.Root().CertificateService.ID
	if uri == "" {
		return nil, unsupported(op, "service root has no CertificateService")
	}
	var svc serviceBody
	if err := wire.GetJSON(api, uri, &svc); err != nil {
		if wire.ReasonOf(err) == wire.ReasonNotFound {
			return nil, unsupported(op, "%s answers 404", uri)
		}
		return nil, err
	}
	return &svc, nil
}

// Certificates does the work of bmc.BMC.Certificates.
func Certificates(ctx context.Context, c wire.Conn) ([]Certificate, error) {
	const op = "list HTTPS certificates"
	colls, err := httpsCollections(ctx, c, op)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	api, err := c.Client(ctx)
	if err != nil {
		return nil, wire.Wrap(op, err)
	}
	var out []Certificate
	for _, coll := range colls {
		list, err := schemas.GetCollection(api, coll)
		if err != nil {
			if wire.ReasonOf(err) == wire.ReasonNotFound {
				return nil, wire.Wrap(op, unsupported(op, "%s answers 404", coll))
			}
			return nil, wire.Wrap(op, err)
		}
		for _, uri := range list.ItemLinks {
			rc, err := schemas.GetObject[schemas.Certificate](api, uri)
			if err != nil {
				return nil, wire.Wrap(op, err)
			}
			out = append(out, fromResource(coll, rc))
		}
	}
	return out, nil
}

// fromResource reads a Certificate resource, from its certificate where it shows one.
func fromResource(coll string, rc *schemas.Certificate) Certificate {
	c := Certificate{URI: rc.ODataID, Collection: coll, PEM: rc.CertificateString,
		Subject: name(rc.Subject), Issuer: name(rc.Issuer), AlternativeNames: rc.Subject.AlternativeNames,
		SerialNumber: plainHex(rc.SerialNumber), Fingerprint: plainHex(rc.Fingerprint), FingerprintHashAlgorithm: rc.FingerprintHashAlgorithm}
	for _, u := range rc.KeyUsage {
		c.KeyUsage = append(c.KeyUsage, string(u))
	}
	c.NotBefore, _ = time.Parse(time.RFC3339, rc.ValidNotBefore)
	c.NotAfter, _ = time.Parse(time.RFC3339, rc.ValidNotAfter)
	if x := leaf(rc.CertificateString); x != nil {
		// The certificate is the truth; vendors format the resource's fields each their way.
		sum := sha256.Sum256(x.Raw)
		c.X509, c.Subject, c.Issuer = x, pkixName(x.Subject.CommonName, x.Subject.Organization, x.Subject.OrganizationalUnit,
			x.Subject.Locality, x.Subject.Province, x.Subject.Country), pkixName(x.Issuer.CommonName, x.Issuer.Organization,
			x.Issuer.OrganizationalUnit, x.Issuer.Locality, x.Issuer.Province, x.Issuer.Country)
		c.AlternativeNames = append([]string(nil), x.DNSNames...)
		for _, ip := range x.IPAddresses {
			c.AlternativeNames = append(c.AlternativeNames, ip.String())
		}
		c.NotBefore, c.NotAfter = x.NotBefore, x.NotAfter
		c.SerialNumber = hex.EncodeToString(x.SerialNumber.Bytes())
		c.Fingerprint, c.FingerprintHashAlgorithm = hex.EncodeToString(sum[:]), "TPM_ALG_SHA256"
	}
	return c
}

func name(id schemas.CertificateIdentifier) Name {
	return Name{CommonName: id.CommonName, Organization: id.Organization, OrganizationalUnit: id.OrganizationalUnit,
		City: id.City, State: id.State, Country: id.Country}
}

func pkixName(cn string, o, ou, l, st, c []string) Name {
	first := func(v []string) string {
		if len(v) == 0 {
			return ""
		}
		return v[0]
	}
	return Name{CommonName: cn, Organization: first(o), OrganizationalUnit: first(ou), City: first(l), State: first(st), Country: first(c)}
}

// plainHex makes "3A:0F" or "3a 0f" read 3a0f; other text stays as it is.
func plainHex(s string) string {
	p := strings.ToLower(strings.NewReplacer(":", "", " ", "", "-", "").Replace(s))
	if _, err := hex.DecodeString(p); err != nil {
		return s
	}
	return p
}

// leaf is the first certificate of a PEM text (nil when there is none).
func leaf(s string) *x509.Certificate {
	rest := []byte(s)
	for {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return nil
		}
		if b.Type == "CERTIFICATE" {
			x, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil
			}
			return x
		}
	}
}

// GenerateCSR does the work of bmc.BMC.GenerateCSR.
func GenerateCSR(ctx context.Context, c wire.Conn, req CSRRequest) (csrPEM, collection string, err error) {
	const op = "generate certificate signing request"
	if req.CommonName == "" {
		return "", "", wire.New(wire.ReasonInvalidConfig, op, "a common name is required")
	}
	api, err := c.Client(ctx)
	if err != nil {
		return "", "", wire.NotSent(op, err)
	}
	svc, err := service(api, c, op)
	if err != nil {
		return "", "", wire.NotSent(op, err)
	}
	if svc.Actions.GenerateCSR.Target == "" {
		return "", "", wire.NotSent(op, unsupported(op, "its CertificateService offers no GenerateCSR"))
	}
	if req.Collection == "" {
		colls, err := httpsCollections(ctx, c, op)
		if err != nil {
			return "", "", wire.NotSent(op, err)
		}
		req.Collection = colls[0]
	}
	body := map[string]any{"CertificateCollection": wire.Link{ID: req.Collection}, "CommonName": req.CommonName}
	for k, v := range map[string]string{"Organization": req.Organization, "OrganizationalUnit": req.OrganizationalUnit,
		"City": req.City, "State": req.State, "Country": req.Country, "Email": req.Email,
		"KeyPairAlgorithm": req.KeyPairAlgorithm, "KeyCurveId": req.KeyCurveID} {
		if v != "" {
			body[k] = v
		}
	}
	if len(req.AlternativeNames) > 0 {
		body["AlternativeNames"] = req.AlternativeNames
	}
	if req.KeyBitLength > 0 {
		body["KeyBitLength"] = req.KeyBitLength
	}
	resp, err := api.Post(svc.Actions.GenerateCSR.Target, body)
	if err != nil {
		return "", "", wire.Wrap(op, err)
	}
	defer resp.Body.Close()
	var out struct {
		CSRString             string
		CertificateCollection wire.Link
	}
	if err := decode(resp, &out); err != nil {
		return "", "", wire.New(wire.ReasonUnknown, op, "read the answer: %v", err)
	}
	b, _ := pem.Decode([]byte(out.CSRString))
	if b == nil {
		return "", "", wire.New(wire.ReasonUnknown, op, "the BMC answered no PEM certificate signing request")
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err == nil {
		err = csr.CheckSignature()
	}
	if err != nil {
		return "", "", wire.New(wire.ReasonUnknown, op, "the BMC's certificate signing request is unusable: %v", err)
	}
	collection = out.CertificateCollection.ID
	if collection == "" {
		collection = req.Collection
	}
	c.Log().V(1).Info("certificate signing request generated", "commonName", req.CommonName, "collection", collection)
	return out.CSRString, collection, nil
}

// ReplaceCertificate does the work of bmc.BMC.ReplaceCertificate.
func ReplaceCertificate(ctx context.Context, c wire.Conn, certURI, certPEM string) error {
	op := "replace certificate " + certURI
	x := leaf(certPEM)
	if x == nil {
		return wire.New(wire.ReasonInvalidConfig, op, "no PEM certificate to install")
	}
	api, err := c.Client(ctx)
	if err != nil {
		return wire.NotSent(op, err)
	}
	svc, err := service(api, c, op)
	if err != nil {
		return wire.NotSent(op, err)
	}
	if svc.Actions.ReplaceCertificate.Target == "" {
		return wire.NotSent(op, unsupported(op, "its CertificateService offers no ReplaceCertificate"))
	}
	if certURI == "" {
		list, err := Certificates(ctx, c)
		if err != nil {
			return wire.NotSent(op, err)
		}
		if len(list) == 0 {
			return wire.NotSent(op, unsupported(op, "no HTTPS certificate to replace"))
		}
		certURI = list[0].URI
		op += certURI
	}
	resp, err := api.Post(svc.Actions.ReplaceCertificate.Target, map[string]any{
		"CertificateString": certPEM, "CertificateType": "PEM", "CertificateUri": wire.Link{ID: certURI},
	})
	if err != nil {
		var rf *schemas.Error
		if errors.As(err, &rf) && rf.HTTPReturnedStatusCode == http.StatusBadRequest {
			return &wire.Error{Reason: wire.ReasonRejected, Op: op, StatusCode: http.StatusBadRequest,
				Err: fmt.Errorf("%w: %s", ErrCertificateRefused, message(rf))}
		}
		return wire.Wrap(op, err)
	}
	defer resp.Body.Close()
	// 200 or 204: installed (served at once, or from the BMC's next reset on some); 202: a task
	// installs it. Either way the caller looks at what the BMC serves.
	c.Log().V(1).Info("certificate replaced", "certificate", certURI, "subject", x.Subject.CommonName,
		"serial", hex.EncodeToString(x.SerialNumber.Bytes()), "status", resp.StatusCode, "task", resp.Header.Get("Location"))
	return nil
}

// message is what a Redfish error says, its extended info first.
func message(e *schemas.Error) string {
	var parts []string
	for _, m := range e.ExtendedInfos {
		if m.Message != "" {
			parts = append(parts, m.Message)
		}
	}
	if len(parts) == 0 && e.Message != "" {
		parts = append(parts, e.Message)
	}
	if len(parts) == 0 {
		return e.Error()
	}
	return strings.Join(parts, "; ")
}

func decode(resp *http.Response, v any) error { return json.NewDecoder(resp.Body).Decode(v) }
