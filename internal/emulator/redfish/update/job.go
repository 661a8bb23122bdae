package update

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/metalhub/metalhub/internal/emulator/redfish/rfhttp"
)

// Job is a task the TaskService runs that is not an update, such as a drive's secure erase or a
// volume's initialization: it runs for Duration, then completes (running Done) or, with Fail,
// ends in Exception. It is listed and served beside the updates, with the same ids.
type Job struct {
	// Name is the task's Name ("Secure erase of drive Disk.Bay.0").
	Name string
	// Key names what the job works on: a job whose Key a running job holds is refused
	// (ErrInUse), as a BMC refuses a second erase of a drive it is erasing.
	Key string
	// Message says what the job does; it is the task's first message.
	Message string
	// Target and Body are the action the job carries out (its target URI and the JSON body it
	// was posted with), served as the task's Payload.
	Target, Body string
	// Duration is how long the job runs (at least a nanosecond).
	Duration time.Duration
	// Fail ends the job in Exception with FailMessage instead of completing it.
	Fail        bool
	FailMessage string
	// NoPayload serves the task without Payload (Faults.TasksWithoutPayload).
	NoPayload bool
	// Done runs when the job completes (never when it fails), outside the service's lock and
	// before the task reads Completed: whoever sees Completed sees Done's effect.
	Done func()
}

// ErrInUse is StartJob's answer while a running job holds the job's Key.
var ErrInUse = errors.New("a task on the same resource is running")

// StartJob starts j as a task and returns its Id, or ErrInUse. The job ends on its own; the
// emulator's shutdown stops it where it is.
func (svc *Service) StartJob(j Job) (string, error) {
	if j.Duration <= 0 {
		j.Duration = time.Nanosecond
	}
	svc.mu.Lock()
	if svc.tasks == nil {
		svc.tasks = map[string]*task{}
	}
	for _, t := range svc.tasks {
		if t.job != nil && t.state == "Running" && t.job.Key == j.Key {
			svc.mu.Unlock()
			return "", ErrInUse
		}
	}
	svc.next++
	t := &task{id: strconv.Itoa(svc.next), started: time.Now(), duration: j.Duration, fail: j.Fail, noPayload: j.NoPayload, state: "Running", job: &j}
	svc.tasks[t.id] = t
	svc.mu.Unlock()
	timer := time.AfterFunc(j.Duration, func() { svc.finishJob(t) })
	closing := svc.host.Closing()
	go func() { <-closing; timer.Stop() }()
	return t.id, nil
}

// Running reports whether a running job holds key.
func (svc *Service) Running(key string) bool {
	svc.mu.Lock()
	defer svc.mu.Unlock()
	for _, t := range svc.tasks {
		if t.job != nil && t.state == "Running" && t.job.Key == key {
			return true
		}
	}
	return false
}

// WriteAccepted answers the request that started task id: 202 Accepted, Location the task's
// URI, Retry-After, and the task as its body (as an accepted update is answered).
func (svc *Service) WriteAccepted(w http.ResponseWriter, id string) {
	svc.mu.Lock()
	t := svc.tasks[id]
	var body rfhttp.Obj
	if t != nil {
		body = svc.taskBody(t)
	}
	svc.mu.Unlock()
	if t == nil {
		rfhttp.WriteError(w, http.StatusInternalServerError, "InternalError", "The task "+id+" is gone.")
		return
	}
	w.Header().Set("Location", v1+"/TaskService/Tasks/"+id)
	w.Header().Set("Retry-After", "1")
	rfhttp.WriteJSON(w, http.StatusAccepted, body)
}

// finishJob ends a job: Exception when it fails, else Done's effect and then Completed.
func (svc *Service) finishJob(t *task) {
	if !t.fail && t.job.Done != nil {
		t.job.Done()
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	t.ended = time.Now()
	t.state = "Completed"
	if t.fail {
		t.state = "Exception"
	}
}

// jobBody is the Task resource of a job (under svc.mu).
func jobBody(t *task) rfhttp.Obj {
	j := t.job
	pct, st := 100, "OK"
	msgs := []rfhttp.Obj{{"MessageId": "TaskEvent.1.0.TaskStarted", "Message": j.Message, "Severity": "OK"}}
	switch t.state {
	case "Running":
		pct = min(99, int(100*time.Since(t.started)/t.duration))
	case "Exception":
		st = "Critical"
		msgs = append(msgs, rfhttp.Obj{"MessageId": "TaskEvent.1.0.TaskAborted", "Message": j.FailMessage, "Severity": "Critical"})
	default:
		msgs = append(msgs, rfhttp.Obj{"MessageId": "TaskEvent.1.0.TaskCompletedOK", "Message": "The task with Id '" + t.id + "' has completed.", "Severity": "OK"})
	}
	body := rfhttp.Obj{
		"@odata.type": "#Task.v1_4_3.Task", "@odata.id": v1 + "/TaskService/Tasks/" + t.id, "Id": t.id, "Name": j.Name,
		"TaskState": t.state, "TaskStatus": st, "PercentComplete": pct, "StartTime": t.started.UTC().Format(time.RFC3339),
		"Messages": msgs,
	}
	if !t.ended.IsZero() {
		body["EndTime"] = t.ended.UTC().Format(time.RFC3339)
	}
	if !t.noPayload {
		body["Payload"] = rfhttp.Obj{"TargetUri": j.Target, "HttpOperation": "POST", "JsonBody": j.Body}
	}
	return body
}
