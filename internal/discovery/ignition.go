package discovery

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"text/template"
)

const (
	// IgnitionFormatKey in the round's Secret names the ignition's format, as the reference
	// operator's samples do; IgnitionFormat is the value for DefaultIgnitionTemplate.
	IgnitionFormatKey = "format"
	IgnitionFormat    = "fcos"

	// ProbeTokenPath is where DefaultIgnitionTemplate puts the token on the discovery host: a
	// file (mode 0600) rather than an argument, so it never shows in ps or the journal.
	ProbeTokenPath = "/etc/metalprobe/token"
)

// Params are what an ignition template may use.
type Params struct {
	// RegistryURL is the registry's base URL as reachable from the servers.
	RegistryURL string
	// ServerUUID is the Server's spec.systemUUID.
	ServerUUID string
	// Token is the round's bearer token.
	Token string
	// ProbeImage is the container image with metalprobe as its entrypoint.
	ProbeImage string
	// CleaningPolicy, in a cleaning round, is what metalprobe erases (its --clean flag);
	// empty in a discovery round.
	CleaningPolicy string
}

// DefaultIgnitionTemplate is a Butane (Fedora CoreOS) config, the format of the reference
// operator's ignition Secrets: a systemd unit runs metalprobe in a privileged, host-network
// container so it sees the host's /sys, /proc and NICs; the OS's pci.ids is copied beside the
// token (the image is FROM scratch), so devices get names. Restart=on-failure with metalprobe's
// exit code 0 on success means the unit reports until the registry confirms, then stops.
const DefaultIgnitionTemplate = `variant: fcos
version: "1.3.0"
systemd:
  units:
    - name: metalprobe.service
      enabled: true
      contents: |-
        [Unit]
        Description=metalhub discovery agent
        Wants=network-online.target
        After=network-online.target
        [Service]
        Restart=on-failure
        RestartSec=20
        ExecStartPre=-/usr/bin/podman rm --force metalprobe
        ExecStartPre=/usr/bin/podman pull {{ .ProbeImage }}
        ExecStartPre=-/bin/sh -c 'cp /usr/share/hwdata/pci.ids /etc/metalprobe/pci.ids || cp /usr/share/misc/pci.ids /etc/metalprobe/pci.ids'
        ExecStart=/usr/bin/podman run --rm --network host --privileged --name metalprobe --volume /etc/metalprobe:/etc/metalprobe:ro {{ .ProbeImage }} --registry-url={{ .RegistryURL }} --server-uuid={{ .ServerUUID }} --token-file=` + ProbeTokenPath + `{{ if .CleaningPolicy }} --clean={{ .CleaningPolicy }}{{ end }}
        ExecStop=/usr/bin/podman stop metalprobe
        [Install]
        WantedBy=multi-user.target
storage:
  files:
    - path: ` + ProbeTokenPath + `
      mode: 0600
      contents:
        inline: {{ .Token }}
`

var (
	// Values are pasted into YAML and a systemd command line unquoted, so they are restricted
	// to characters that cannot end a YAML scalar, start a comment, or split an argument.
	safeToken = regexp.MustCompile(`^[A-Za-z0-9._~+/=-]+$`)
	safeUUID  = regexp.MustCompile(`^[A-Za-z0-9-]+$`)
	safeImage = regexp.MustCompile(`^[A-Za-z0-9._/:@-]+$`)
	safeURL   = regexp.MustCompile(`^[A-Za-z0-9._~:/?&=%\[\]@!$+,;-]+$`)
)

// Validate checks that every parameter is present and safe to paste into a template.
func (p Params) Validate() error {
	var errs []error
	if !safeURL.MatchString(p.RegistryURL) {
		errs = append(errs, fmt.Errorf("registry URL %q is empty or has characters not allowed unquoted", p.RegistryURL))
	} else if u, err := url.Parse(p.RegistryURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("registry URL %q must be an absolute http(s) URL", p.RegistryURL))
	}
	if !safeUUID.MatchString(p.ServerUUID) {
		errs = append(errs, fmt.Errorf("server UUID %q is empty or not a UUID", p.ServerUUID))
	}
	if !safeToken.MatchString(p.Token) {
		// Never print the token, not even a bad one.
		errs = append(errs, errors.New("token is empty or has characters not allowed unquoted"))
	}
	switch p.CleaningPolicy {
	case "", "Metadata", "RootDisk", "AllDisks":
	default:
		errs = append(errs, fmt.Errorf("cleaning policy %q is not Metadata, RootDisk or AllDisks", p.CleaningPolicy))
	}
	if !safeImage.MatchString(p.ProbeImage) {
		errs = append(errs, fmt.Errorf("probe image %q is empty or not an image reference", p.ProbeImage))
	}
	return errors.Join(errs...)
}

// ParseIgnitionTemplate parses an ignition template, e.g. one given by flag, so that a bad
// template fails at start-up rather than at the first discovery. "" means the default.
func ParseIgnitionTemplate(templateText string) (*template.Template, error) {
	if strings.TrimSpace(templateText) == "" {
		templateText = DefaultIgnitionTemplate
	}
	t, err := template.New("ignition").Option("missingkey=error").Parse(templateText)
	if err != nil {
		return nil, fmt.Errorf("parsing ignition template: %w", err)
	}
	// Render once with placeholders: a template that refers to fields Params lacks fails here.
	sample := Params{RegistryURL: "http://registry.invalid", ServerUUID: "00000000-0000-0000-0000-000000000000", Token: "t", ProbeImage: "image"}
	if err := t.Execute(&bytes.Buffer{}, sample); err != nil {
		return nil, fmt.Errorf("checking ignition template: %w", err)
	}
	return t, nil
}

// Cleans reports whether a template starts metalprobe with the round's cleaning policy
// (--clean={{ .CleaningPolicy }}): without it a cleaning round would boot an agent that only
// reports hardware, and never clean.
func Cleans(t *template.Template) bool {
	sample := Params{RegistryURL: "http://registry.invalid", ServerUUID: "00000000-0000-0000-0000-000000000000", Token: "t", ProbeImage: "image", CleaningPolicy: "AllDisks"}
	var b bytes.Buffer
	return t.Execute(&b, sample) == nil && strings.Contains(b.String(), "--clean=AllDisks")
}

// RenderIgnition renders the ignition that boots a server into discovery: templateText (a Go
// text/template over Params; "" means DefaultIgnitionTemplate) with p.
func RenderIgnition(p Params, templateText string) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("rendering ignition: %w", err)
	}
	t, err := ParseIgnitionTemplate(templateText)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, p); err != nil {
		return nil, fmt.Errorf("rendering ignition: %w", err)
	}
	return b.Bytes(), nil
}
