package lifecycle

import (
	"reflect"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Status is summarise-and-patch (Flux) or "Dirty, save once" (metal3): a handler changes
// p.Obj's status in memory, as its report of what it observed, and the Reconciler writes it once
// at the end of a pass that made no other write to the object, whether the handler succeeded
// or failed. A pass that wrote spec or
// metadata leaves its status change for the next pass, which recomputes it from the fresh
// object; so a handler never writes status itself and never writes twice.

// statusOf returns a deep copy of obj's Status field, or nil for a kind without one.
func statusOf(obj client.Object) any {
	v := statusField(obj)
	if !v.IsValid() {
		return nil
	}
	return statusField(obj.DeepCopyObject().(client.Object)).Interface()
}

func statusField(obj client.Object) reflect.Value {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return reflect.Value{}
	}
	return v.Elem().FieldByName("Status")
}

// statusChanged reports whether obj's status differs from before (a statusOf snapshot).
func statusChanged(before any, obj client.Object) bool {
	v := statusField(obj)
	if !v.IsValid() {
		return false
	}
	return !equality.Semantic.DeepEqual(before, v.Interface())
}
