// Checkpoints: one HDF5 file holding everything needed to resume training or to use the
// model - parameters and buffers, optimizer state, schedule state, progress, random
// generator states, the model's configuration, vocabularies and any extra tensors.
// docs/checkpoint-format.md describes the layout for readers that are not ember.
//
// Never lose data:
// - save_checkpoint builds the file in memory, writes it to a temporary file in the
//   target's directory with every system call checked, fsyncs it, then renames it over
//   the target (and fsyncs the directory): a crash at any moment leaves the old or the
//   new checkpoint, never a broken one, and a failure names the system's reason.
// - Every file carries a 512-byte header (HDF5's user block, skipped by h5py and
//   h5dump) with the file's size and a CRC-32 of everything after the header, so a
//   truncated or corrupted file is rejected before any of it is parsed.
// - load_checkpoint checks the whole file against the model, optimizer, schedule,
//   generators and configuration it is given before it changes any of them.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/error.h"
#include "core/random.h"
#include "core/tensor.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

namespace ember::io {

// The layout version this build writes; reading refuses any other.
constexpr int64_t kCheckpointSchemaVersion = 1;

// A configuration value: an integer, a real number or a string.
using ConfigValue = std::variant<int64_t, double, std::string>;
// A model's configuration by name (e.g. d_model, num_heads), stored as /config attributes.
using Config = std::map<std::string, ConfigValue>;
// The value as text, for messages: a real with 17 digits, a string in single quotes.
std::string to_string(const ConfigValue& v);

// How far training has gone.
struct Progress {
  int64_t step = 0;  // optimizer steps taken
  int64_t epoch = 0;  // completed passes over the data
  int64_t position = 0;  // index of the next example in the current epoch's order
};

// A learning-rate schedule as a checkpoint stores it; optim::make_schedule rebuilds it.
struct ScheduleState {
  std::string kind;  // Schedule::kind()
  std::map<std::string, double> settings;  // Schedule::settings()
  int64_t last_step = 0;  // Schedule::last_step()
};

// The contents of a checkpoint, in memory.
struct Checkpoint {
  std::map<std::string, Tensor> model;  // `/model/<dotted name>`: parameters and persistent buffers
  std::optional<optim::OptimizerState> optimizer;  // the optimizer's state, if one was saved
  std::optional<ScheduleState> schedule;  // the schedule's state, if one was saved
  Progress progress;  // `/progress`
  std::map<std::string, std::vector<uint64_t>> generators;  // `/rng/<name>`: Generator::get_state()
  Config config;  // `/config` attributes
  std::map<std::string, std::vector<std::string>> vocab;  // `/vocab/<name>`: tokens by id
  std::map<std::string, Tensor> extra;  // `/extra/<name>`: e.g. loss history
};

// Writes the checkpoint atomically (see checkpoint.h). Throws ember::Error naming the file and
// the cause (for instance a full disk); the previous file at path is then untouched.
// Also refused before anything is written: names that are empty or contain '/',
// reserved names ("kind", "step", "last_step"), undefined tensors, and step counts or
// progress outside [0, 2^62].
void save_checkpoint(const std::string& path, const Checkpoint& ckpt);

// What read_checkpoint throws when a file's bytes are damaged - no ember header or an
// unreadable one, a size other than the one its header states, a checksum that does not
// match, an image HDF5 cannot open - as a torn copy or a failing disk leaves them. A file
// that cannot be opened, or whose bytes are whole but whose content is refused (another
// schema version, a key of the wrong kind: written by another program, or edited), gives a
// plain Error. CheckpointManager's users can so set damaged files aside and leave the others
// for a person to look at.
class CheckpointDamaged : public Error {
 public:
  explicit CheckpointDamaged(const std::string& what) : Error(what) {}  // A CheckpointDamaged with this message.
};

// Reads and checks a checkpoint file: header, size, checksum, schema version, and that
// every group and dataset has the expected kind and type. Errors (ember::Error) name the
// file and key: a missing, truncated, corrupted or foreign file, or another schema
// version, is refused (a damaged one with CheckpointDamaged).
Checkpoint read_checkpoint(const std::string& path);
// The same from bytes in memory (name is used in messages); the fuzz target uses it.
Checkpoint read_checkpoint_bytes(const std::string& name, const std::vector<uint8_t>& bytes);

// What load_checkpoint restores into. model holds the live tensors (Module::state_dict()),
// which are overwritten in place. Pointers left null, and an empty config, are not
// checked or restored.
struct ResumeTargets {
  std::map<std::string, Tensor> model;  // by dotted name; the file must hold exactly these names
  optim::Optimizer* optimizer = nullptr;  // restored with Optimizer::load_state
  optim::Schedule* schedule = nullptr;  // its kind and settings must match; its counter is restored
  std::map<std::string, Generator*> generators;  // by name, each in the file's `/rng`
  Config config;  // must equal the checkpoint's configuration key by key
};

// Reads the file, checks it against every target (names, shapes, dtypes, optimizer
// kind and slots, schedule kind and settings, generator names, configuration), and only
// then restores them all. On any error nothing is changed. Returns the checkpoint (for
// progress, vocabularies and extras).
Checkpoint load_checkpoint(const std::string& path, ResumeTargets& targets);

// Builds a checkpoint of the given objects (tensors are copied, so training may go on);
// optimizer and schedule may be null. Error when a tensor is undefined or a generator
// null.
Checkpoint make_checkpoint(const std::map<std::string, Tensor>& model, const optim::Optimizer* optimizer,
                           const optim::Schedule* schedule, const std::map<std::string, Generator*>& generators,
                           Progress progress, Config config = {});

// Numbered checkpoints in a directory, keeping the newest keep_last of them:
// `<dir>/<prefix>-<step, 8 digits>.h5`.
class CheckpointManager {
 public:
  // Error when keep_last < 1 or prefix is empty or contains '/'. The directory is
  // created by the first save().
  CheckpointManager(std::string dir, int keep_last = 3, std::string prefix = "ckpt");
  // Named by ckpt.progress.step; returns the path. Then removes the oldest beyond
  // keep_last: one that cannot be removed is not an error (the save succeeded) but is
  // listed, with the reason, in pruning_failures() until the next save. Error (nothing
  // removed) when the step is outside [0, 10^18 - 1], the directory cannot be created or
  // save_checkpoint fails.
  std::string save(const Checkpoint& ckpt);
  std::vector<std::string> list() const;  // existing checkpoints, oldest first
  std::optional<std::string> latest() const;  // the last of list(), or nothing when there is none
  // Where save() puts the checkpoint of step; Error when step is outside [0, 10^18 - 1].
  std::string path_for(int64_t step) const;
  // The step a file's name gives, `<prefix>-<8 to 18 digits>.h5` (in any directory), or
  // nothing for another name. The name is only a claim: the file's '/progress' says.
  std::optional<int64_t> step_named(const std::string& path) const;
  const std::vector<std::string>& pruning_failures() const { return pruning_failures_; }  // "path: reason"

 private:
  std::string dir_, prefix_;
  int keep_last_;
  std::vector<std::string> pruning_failures_;
};

}  // namespace ember::io
