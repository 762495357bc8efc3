// fork() and lens's process-wide state. Internal header of the core part.
//
// A process may fork while another of its threads holds one of lens's spin
// locks (the open-span registry, the record pool, a batch queue): the child
// would inherit it locked, with no thread left to unlock it. So the prepare
// handler takes every such lock, in the order the span path takes them, and
// the parent and child handlers release them. The child has no export
// thread either: each batch processor is then marked as forked, records
// nothing more (spans ended there are dropped and counted) and shuts down at
// once instead of waiting for a thread that does not exist.
//
// Thread safety: the registry is guarded by its own mutex.
#pragma once

namespace lens::detail {

class SpinLock;

// What the fork handlers do for one batch processor.
struct ForkParticipant {
  SpinLock* queue_lock;
  void (*on_child)(void* self);  // called in the child, its queue lock held
  void* self;
};

// Installs the handlers, once per process. A part whose own locks come
// before these on every path installs its handlers after calling this, so
// that its prepare handler runs first (pthread_atfork runs them in reverse).
void install_fork_handlers();

// Installs the handlers and adds / removes a processor.
void register_fork_participant(const ForkParticipant& p);
void unregister_fork_participant(void* self);

}  // namespace lens::detail
