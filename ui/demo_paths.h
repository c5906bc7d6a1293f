// Where the bundled demo (tiny model, dataset, demo_run.yaml) is: the source tree for a build run in
// place, else the installed share/deltatune/demo.
#pragma once
#include <QString>

namespace studio {

QString demoDir();      // "" when not found
QString demoRunFile();  // demoDir()/demo_run.yaml or ""
// Where the studio's demo run writes: $XDG_DATA_HOME/deltatune/runs/demo (~/.local/share/...), next to the
// experiment database, never the demo folder itself (read-only after a package install); runs/demo-2, -3, ...
// once the earlier ones hold a run's output.
QString demoOutputDir();

}  // namespace studio
