package apply

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrahubv1alpha1 "github.com/metalhub/metalhub/api/infrahub/v1alpha1"
	"github.com/metalhub/metalhub/internal/controller/delivery/manifests"
)

// DefaultInventoryChunkBytes is how many bytes of inventory entries one ConfigMap holds: well
// under the API server's 1 MiB object limit, so 10,000 entries take two or three ConfigMaps.
const DefaultInventoryChunkBytes = 512 << 10

// Keys and labels of the inventory ConfigMaps.
const (
	inventoryOfLabel  = "infrahub.operators.com/inventory-of" // the VidraResource's UID
	inventoryGenLabel = "infrahub.operators.com/inventory-generation"
	inventoryVRAnno   = "infrahub.operators.com/vidraresource" // its name, for people
	invKeyServer      = "server"
	invKeyAs          = "as"
	invKeyObjects     = "objects" // entries, one a line
	invKeyGeneration  = "generation"
	invKeyChunks      = "chunks"
)

// InventoryStore keeps each VidraResource's inventory in ConfigMaps of the operator's
// namespace, out of the VidraResource: an annotation caps at 256 KiB (some 4,000 entries), and
// the identity recorded there decides whom a prune acts as, so it must be where only the
// operator writes. A head ConfigMap per VidraResource (vidra-inventory-<uid>) holds the server,
// the identity and, when they fit, the entries; larger inventories go to chunk ConfigMaps of a
// generation the head names, written before the head switches to them, so a reader never sees
// half of a write. Every ConfigMap is owned by its VidraResource: the garbage collector removes
// what a finalizer removed by hand leaves.
type InventoryStore struct {
	Client     client.Client // writes
	Reader     client.Reader // uncached reads: these ConfigMaps are not in any cache
	Namespace  string
	ChunkBytes int
}

// StoredInventory is an inventory as read, with what a later write needs.
type StoredInventory struct {
	Inventory
	Found bool // recorded (in the store, or in the annotation of an earlier version)
	// Legacy: read from InventoryAnnotation; the next write moves it to the store. Its
	// identity was never recorded.
	Legacy  bool
	head    *corev1.ConfigMap // nil when there is none yet
	gen     int
	touched bool // entries were added by this pass (for trimming what it never applied)
}

func inventoryHeadName(uid string) string { return "vidra-inventory-" + uid }

func inventoryChunkName(uid string, gen, i int) string {
	return fmt.Sprintf("vidra-inventory-%s-%d-%d", uid, gen, i)
}

// Load reads vr's inventory: the store's, else the annotation an earlier version wrote. A
// chunk that cannot be read is an error, never an empty inventory.
func (s *InventoryStore) Load(ctx context.Context, vr *infrahubv1alpha1.VidraResource) (StoredInventory, error) {
	uid := string(vr.UID)
	head := &corev1.ConfigMap{}
	err := s.Reader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: inventoryHeadName(uid)}, head)
	if apierrors.IsNotFound(err) {
		v, ok := vr.Annotations[infrahubv1alpha1.InventoryAnnotation]
		if !ok {
			return StoredInventory{}, nil
		}
		return StoredInventory{Inventory: parseInventory(v), Found: true, Legacy: true}, nil
	}
	if err != nil {
		return StoredInventory{}, fmt.Errorf("reading the inventory of %s: %w", vr.Name, err)
	}
	if head.Labels[inventoryOfLabel] != uid {
		return StoredInventory{}, fmt.Errorf("inventory ConfigMap %s/%s is not labelled %s=%s: not trusted", s.Namespace, head.Name, inventoryOfLabel, uid)
	}
	st := StoredInventory{Found: true, head: head, Inventory: Inventory{Server: head.Data[invKeyServer], As: head.Data[invKeyAs]}}
	st.gen, _ = strconv.Atoi(head.Data[invKeyGeneration])
	chunks, _ := strconv.Atoi(head.Data[invKeyChunks])
	st.Objects = splitEntries(head.Data[invKeyObjects])
	for i := range chunks {
		c := &corev1.ConfigMap{}
		if err := s.Reader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: inventoryChunkName(uid, st.gen, i)}, c); err != nil {
			return StoredInventory{}, fmt.Errorf("reading chunk %d of the inventory of %s: %w", i, vr.Name, err)
		}
		st.Objects = append(st.Objects, splitEntries(c.Data[invKeyObjects])...)
	}
	return st, nil
}

func splitEntries(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, "\n")
}

// Save writes next as vr's inventory over st (what load returned). Entries that fit go in the
// head; otherwise a new generation of chunks is written first, then the head names it, then the
// previous generation's chunks go. A conflict on the head (another writer) is an error: the
// pass is retried on a fresh read.
func (s *InventoryStore) Save(ctx context.Context, vr *infrahubv1alpha1.VidraResource, st *StoredInventory, next Inventory) error {
	uid := string(vr.UID)
	head := st.head
	if head == nil {
		head = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: inventoryHeadName(uid)}}
	} else {
		head = head.DeepCopy()
	}
	s.shape(head, vr, st.gen)
	chunks := chunkEntries(next.Objects, s.ChunkBytes)
	gen := st.gen
	head.Data = map[string]string{invKeyServer: next.Server, invKeyAs: next.As}
	if len(chunks) <= 1 {
		head.Data[invKeyObjects] = strings.Join(next.Objects, "\n")
	} else {
		gen++
		for i, c := range chunks {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: inventoryChunkName(uid, gen, i)}}
			s.shape(cm, vr, gen)
			cm.Data = map[string]string{invKeyObjects: c}
			err := s.Client.Create(ctx, cm)
			if apierrors.IsAlreadyExists(err) { // left by a write that stopped before its head
				live := &corev1.ConfigMap{}
				if err = s.Reader.Get(ctx, client.ObjectKeyFromObject(cm), live); err == nil {
					live.Data = cm.Data
					err = s.Client.Update(ctx, live)
				}
			}
			if err != nil {
				return fmt.Errorf("writing chunk %d of the inventory of %s: %w", i, vr.Name, err)
			}
		}
		head.Data[invKeyChunks] = strconv.Itoa(len(chunks))
	}
	head.Data[invKeyGeneration] = strconv.Itoa(gen)
	head.Labels[inventoryGenLabel] = strconv.Itoa(gen)
	var err error
	if head.ResourceVersion == "" {
		err = s.Client.Create(ctx, head)
	} else {
		err = s.Client.Update(ctx, head)
	}
	if err != nil {
		return fmt.Errorf("writing the inventory of %s: %w", vr.Name, err)
	}
	old := st.gen
	st.head, st.gen, st.Inventory, st.Found, st.Legacy = head, gen, next, true, false
	if gen != old {
		if err := s.deleteChunks(ctx, uid, gen); err != nil {
			return fmt.Errorf("removing the previous inventory chunks of %s: %w", vr.Name, err)
		}
	}
	return nil
}

// shape labels and owns an inventory ConfigMap.
func (s *InventoryStore) shape(cm *corev1.ConfigMap, vr *infrahubv1alpha1.VidraResource, gen int) {
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels[inventoryOfLabel] = string(vr.UID)
	cm.Labels[inventoryGenLabel] = strconv.Itoa(gen)
	cm.Labels[manifests.ManagedByLabel] = manifests.ManagedByValue
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[inventoryVRAnno] = vr.Name
	cm.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: infrahubv1alpha1.GroupVersion.String(), Kind: "VidraResource", Name: vr.Name, UID: vr.UID,
		BlockOwnerDeletion: ptr.To(false),
	}}
}

// deleteChunks removes uid's chunk ConfigMaps of every generation but keep (-1: all).
func (s *InventoryStore) deleteChunks(ctx context.Context, uid string, keep int) error {
	list := &corev1.ConfigMapList{}
	if err := s.Reader.List(ctx, list, client.InNamespace(s.Namespace), client.MatchingLabels{inventoryOfLabel: uid}); err != nil {
		return err
	}
	var errs []error
	for i := range list.Items {
		cm := &list.Items[i]
		if cm.Name == inventoryHeadName(uid) || cm.Labels[inventoryGenLabel] == strconv.Itoa(keep) {
			continue
		}
		if err := s.Client.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Remove deletes vr's inventory: its objects are gone, and it with them.
func (s *InventoryStore) Remove(ctx context.Context, vr *infrahubv1alpha1.VidraResource) error {
	uid := string(vr.UID)
	if err := s.deleteChunks(ctx, uid, -1); err != nil {
		return fmt.Errorf("removing the inventory of %s: %w", vr.Name, err)
	}
	head := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: inventoryHeadName(uid)}}
	if err := s.Client.Delete(ctx, head); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the inventory of %s: %w", vr.Name, err)
	}
	return nil
}

// chunkEntries joins entries into strings of at most limit bytes each (an entry longer than
// limit gets a chunk of its own).
func chunkEntries(entries []string, limit int) []string {
	var (
		out []string
		b   strings.Builder
	)
	for _, e := range entries {
		if b.Len() > 0 && b.Len()+1+len(e) > limit {
			out = append(out, b.String())
			b.Reset()
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e)
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}
