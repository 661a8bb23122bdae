package migration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	maintenancev1alpha1 "github.com/metalhub/metalhub/api/maintenance/v1alpha1"
	metalv1alpha1 "github.com/metalhub/metalhub/api/metal/v1alpha1"
	redfish "github.com/metalhub/metalhub/internal/emulator/redfish"
	"github.com/metalhub/metalhub/internal/testenv"
)

// What the IronCore metal-operator leaves behind, as it leaves it: its BMC controller names a
// system's Server <bmc>-system-<index in the Systems collection>, lower-cases spec.systemUUID,
// copies the BMC's labels, makes the BMC the Server's controller owner, and keeps state and power
// in status only; its finalizers are on everything. Nothing of metalhub's bookkeeping is there.

// role is what a server of the laid-out fleet is doing when the switch happens.
type role int

const (
	available      role = iota
	claimed             // Reserved, its claim Bound, powered On, booted from its Ready boot configuration
	parked              // Parked by the operation annotation, the durable marker set
	maintained          // Maintenance, under an Enforced ServerMaintenance, Off
	discoveringOn       // Discovery, booted into the reference's discovery image (On)
	discoveringOff      // Discovery, Off (the reference had not powered it on yet)
	// Maintenance under a ServerMaintenance of maintenance.metal.ironcore.dev (the newer
	// stack's group): no metal.ironcore.dev object of that name.
	maintainedElsewhere

	// The rest of the states the reference can leave (the plan's rows, TestPlanPredictsFirstPasses).
	initialOff          // Initial, Off
	initialOn           // Initial, On (the reference had not powered it off yet)
	availableOn         // Available, On (the reference had not powered it off yet)
	claimedBoxOff       // Reserved, its claim asks On, the box Off
	claimedOffBoxOn     // Reserved, its claim asks Off, the box On
	claimedOffBoxOff    // Reserved, its claim asks Off, the box Off
	claimGoneOn         // Reserved, its claim gone, On
	releasedOff         // Released (reclaim policy Retain), its claim gone, Off
	releasedOn          // Released (reclaim policy Retain), its claim gone, On
	parkedOn            // Parked, On
	maintainedOn        // Maintenance asking Off, the box On
	maintenanceBootOn   // Maintenance with a boot template, its configuration Ready, the box On (booted)
	maintenanceBootOff  // Maintenance with a boot template, its configuration Ready, the box Off
	errorDiscoveredOff  // Error, discovered before, Off
	errorDiscoveredOn   // Error, discovered before, On
	errorUndiscoveredOn // Error, never discovered, On
	errorUndiscoveredOff
)

// laidOut is one BMC and its Server, as the reference operator left them.
type laidOut struct {
	bmc    *redfish.BMC
	name   string // the BMC object's name
	server string // <bmc>-system-0
	role   role
}

const claimNS = "default"

func referenceServerName(bmc string, index int) string {
	return fmt.Sprintf("%s-system-%d", bmc, index)
}

// layOut creates the objects of fleet b as the reference operator leaves them, roles[i] for BMC
// i (available past the end), and sets the emulated systems' power to match.
func layOut(t testing.TB, c client.Client, prefix string, bmcs []*redfish.BMC, roles map[int]role) []laidOut {
	t.Helper()
	ctx := context.Background()
	var out []laidOut
	for i, b := range bmcs {
		name := fmt.Sprintf("%s-%d", prefix, i)
		l := laidOut{bmc: b, name: name, server: referenceServerName(name, 0), role: roles[i]}
		user, pass := b.Credentials()
		must(t, c.Create(ctx, &metalv1alpha1.BMCSecret{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Data:       map[string][]byte{"username": []byte(user), "password": []byte(pass)},
		}))
		port := b.URL()[strings.LastIndex(b.URL(), ":")+1:]
		var p int32
		fmt.Sscanf(port, "%d", &p)
		bo := &metalv1alpha1.BMC{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"rack": "r1", "fleet": prefix},
				Finalizers: []string{"metal.ironcore.dev/bmc"}},
			Spec: metalv1alpha1.BMCSpec{
				Access:       &metalv1alpha1.InlineEndpoint{IP: "127.0.0.1"},
				BMCSecretRef: corev1.LocalObjectReference{Name: name},
				Protocol:     metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolRedfish, Port: p, Scheme: metalv1alpha1.HTTPScheme},
			},
		}
		must(t, c.Create(ctx, bo))
		bo.Status.State, bo.Status.PowerState = metalv1alpha1.BMCStateEnabled, metalv1alpha1.PowerStateOn
		must(t, testenv.WriteStatus(ctx, c, bo))

		sys := b.Systems()[0]
		s := &metalv1alpha1.Server{
			ObjectMeta: metav1.ObjectMeta{Name: l.server, Labels: map[string]string{"rack": "r1", "fleet": prefix},
				Finalizers: []string{"metal.ironcore.dev/server"}},
			Spec: metalv1alpha1.ServerSpec{
				SystemUUID: strings.ToLower(sys.UUID()),
				SystemURI:  "/redfish/v1/Systems/" + sys.ID(),
				BMCRef:     &corev1.LocalObjectReference{Name: name},
			},
		}
		must(t, controllerutil.SetControllerReference(bo, s, c.Scheme()))
		state, power := metalv1alpha1.ServerStateAvailable, metalv1alpha1.PowerStateOff
		switch l.role {
		case claimed:
			state, power = metalv1alpha1.ServerStateReserved, metalv1alpha1.PowerStateOn
			s.Spec.Power = metalv1alpha1.PowerOn
			s.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Name: l.server, Namespace: claimNS}
			s.Spec.BootConfigurationRef = &metalv1alpha1.ObjectReference{Name: l.server, Namespace: claimNS}
		case parked:
			state = metalv1alpha1.ServerStateParked
			s.Annotations = map[string]string{metalv1alpha1.ParkedAnnotation: "true"}
		case maintained:
			state = metalv1alpha1.ServerStateMaintenance
			s.Spec.ServerMaintenanceRef = &metalv1alpha1.ObjectReference{Name: l.server, Namespace: claimNS}
		case maintainedElsewhere:
			state = metalv1alpha1.ServerStateMaintenance
			s.Spec.ServerMaintenanceRef = &metalv1alpha1.ObjectReference{Name: l.server + "-mmo", Namespace: claimNS}
		case discoveringOn:
			state, power = metalv1alpha1.ServerStateDiscovery, metalv1alpha1.PowerStateOn
			s.Spec.Power = metalv1alpha1.PowerOn
		case discoveringOff:
			state = metalv1alpha1.ServerStateDiscovery
		case initialOff, initialOn:
			state = metalv1alpha1.ServerStateInitial
		case availableOn:
			power = metalv1alpha1.PowerStateOn
		case claimedBoxOff, claimedOffBoxOn, claimedOffBoxOff, claimGoneOn, releasedOff, releasedOn:
			state = metalv1alpha1.ServerStateReserved
			s.Spec.ServerClaimRef = &metalv1alpha1.ImmutableObjectReference{Name: l.server, Namespace: claimNS}
			s.Spec.BootConfigurationRef = &metalv1alpha1.ObjectReference{Name: l.server, Namespace: claimNS}
			if l.role == releasedOff || l.role == releasedOn {
				state = metalv1alpha1.ServerStateReleased
				s.Spec.ReclaimPolicy = metalv1alpha1.ReclaimPolicyRetain
			}
		case parkedOn:
			state, power = metalv1alpha1.ServerStateParked, metalv1alpha1.PowerStateOn
			s.Annotations = map[string]string{metalv1alpha1.ParkedAnnotation: "true"}
		case maintainedOn:
			state, power = metalv1alpha1.ServerStateMaintenance, metalv1alpha1.PowerStateOn
			s.Spec.ServerMaintenanceRef = &metalv1alpha1.ObjectReference{Name: l.server, Namespace: claimNS}
		case maintenanceBootOn, maintenanceBootOff:
			state = metalv1alpha1.ServerStateMaintenance
			s.Spec.ServerMaintenanceRef = &metalv1alpha1.ObjectReference{Name: l.server, Namespace: claimNS}
			s.Spec.MaintenanceBootConfigurationRef = &metalv1alpha1.ObjectReference{Name: l.server, Namespace: claimNS}
		case errorDiscoveredOff, errorDiscoveredOn, errorUndiscoveredOn, errorUndiscoveredOff:
			state = metalv1alpha1.ServerStateError
		}
		switch l.role {
		case initialOn, claimedOffBoxOn, claimGoneOn, releasedOn, maintenanceBootOn, errorDiscoveredOn, errorUndiscoveredOn:
			power = metalv1alpha1.PowerStateOn
		case claimedBoxOff, claimedOffBoxOff, releasedOff, maintenanceBootOff:
			power = metalv1alpha1.PowerStateOff
		}
		must(t, c.Create(ctx, s))
		s.Status.State, s.Status.PowerState = state, power
		if l.role == errorDiscoveredOff || l.role == errorDiscoveredOn {
			// What the reference's discovery leaves: the probe's interfaces.
			s.Status.NetworkInterfaces = []metalv1alpha1.NetworkInterface{{Name: "eth0", MACAddress: fmt.Sprintf("02:00:00:00:%02x:01", i%256), IP: "10.0.0.1"}}
		}
		s.Status.Manufacturer = b.Vendor()
		must(t, testenv.WriteStatus(ctx, c, s))
		if power == metalv1alpha1.PowerStateOn {
			sys.SetPowerState("On")
		} else {
			sys.SetPowerState("Off")
		}

		switch l.role {
		case claimed, claimedBoxOff, claimedOffBoxOn, claimedOffBoxOff:
			claimPower := metalv1alpha1.PowerOn
			if l.role == claimedOffBoxOn || l.role == claimedOffBoxOff {
				claimPower = metalv1alpha1.PowerOff
			}
			claim := &metalv1alpha1.ServerClaim{
				ObjectMeta: metav1.ObjectMeta{Name: l.server, Namespace: claimNS, Finalizers: []string{"metal.ironcore.dev/serverclaim"}},
				Spec: metalv1alpha1.ServerClaimSpec{Power: claimPower, Image: "example/os:1",
					ServerRef: &corev1.LocalObjectReference{Name: l.server}},
			}
			must(t, c.Create(ctx, claim))
			claim.Status.Phase = metalv1alpha1.PhaseBound
			must(t, testenv.WriteStatus(ctx, c, claim))
			sbc := &metalv1alpha1.ServerBootConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: l.server, Namespace: claimNS},
				Spec: metalv1alpha1.ServerBootConfigurationSpec{ServerRef: corev1.LocalObjectReference{Name: l.server},
					Image: "example/os:1"},
			}
			must(t, controllerutil.SetControllerReference(claim, sbc, c.Scheme()))
			must(t, c.Create(ctx, sbc))
			sbc.Status.State = metalv1alpha1.ServerBootConfigurationStateReady
			must(t, testenv.WriteStatus(ctx, c, sbc))
		case maintainedElsewhere:
			m := &maintenancev1alpha1.ServerMaintenance{
				ObjectMeta: metav1.ObjectMeta{Name: l.server + "-mmo", Namespace: claimNS, Finalizers: []string{"metal.ironcore.dev/servermaintenance"}},
				Spec: maintenancev1alpha1.ServerMaintenanceSpec{ServerRef: &corev1.LocalObjectReference{Name: l.server},
					Policy: metalv1alpha1.ServerMaintenancePolicyEnforced},
			}
			must(t, c.Create(ctx, m))
			m.Status.State = metalv1alpha1.ServerMaintenanceStateInMaintenance
			must(t, testenv.WriteStatus(ctx, c, m))
		case maintenanceBootOn, maintenanceBootOff:
			// As the reference leaves it: the configuration made from the template, owned by
			// the maintenance and Ready; the server powered as the maintenance asks once it was.
			spec := metalv1alpha1.ServerBootConfigurationSpec{ServerRef: corev1.LocalObjectReference{Name: l.server}, Image: "example/firmware:1"}
			m := &metalv1alpha1.ServerMaintenance{
				ObjectMeta: metav1.ObjectMeta{Name: l.server, Namespace: claimNS, Finalizers: []string{"metal.ironcore.dev/servermaintenance"}},
				Spec: metalv1alpha1.ServerMaintenanceSpec{ServerRef: &corev1.LocalObjectReference{Name: l.server},
					Policy: metalv1alpha1.ServerMaintenancePolicyEnforced, ServerPower: metalv1alpha1.PowerOn,
					ServerBootConfigurationTemplate: &metalv1alpha1.ServerBootConfigurationTemplate{Name: l.server, Spec: spec}},
			}
			must(t, c.Create(ctx, m))
			m.Status.State = metalv1alpha1.ServerMaintenanceStateInMaintenance
			must(t, testenv.WriteStatus(ctx, c, m))
			sbc := &metalv1alpha1.ServerBootConfiguration{ObjectMeta: metav1.ObjectMeta{Name: l.server, Namespace: claimNS}, Spec: spec}
			must(t, controllerutil.SetControllerReference(m, sbc, c.Scheme()))
			must(t, c.Create(ctx, sbc))
			sbc.Status.State = metalv1alpha1.ServerBootConfigurationStateReady
			must(t, testenv.WriteStatus(ctx, c, sbc))
		case maintained, maintainedOn:
			m := &metalv1alpha1.ServerMaintenance{
				ObjectMeta: metav1.ObjectMeta{Name: l.server, Namespace: claimNS, Finalizers: []string{"metal.ironcore.dev/servermaintenance"}},
				Spec: metalv1alpha1.ServerMaintenanceSpec{ServerRef: &corev1.LocalObjectReference{Name: l.server},
					Policy: metalv1alpha1.ServerMaintenancePolicyEnforced, ServerPower: metalv1alpha1.PowerOff},
			}
			must(t, c.Create(ctx, m))
			m.Status.State = metalv1alpha1.ServerMaintenanceStateInMaintenance
			must(t, testenv.WriteStatus(ctx, c, m))
		}
		out = append(out, l)
	}
	return out
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
