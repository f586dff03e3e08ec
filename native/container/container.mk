# fakegpu-create: the container runtime's `create` in C (native/container/), included by native/Makefile.
# Linked with native/common's device resolution and table reader; no NVIDIA header needed.
# fakegpu-procfs: /proc/driver/nvidia for a container or a command (procfs.c, which create links too).
CT_MAINS := container/procfs_main.c
CT_SRC  := $(filter-out $(CT_MAINS),$(wildcard container/*.c))
CT_OBJ  := $(CT_SRC:%.c=$(OBJ)/%.o)
CT_BIN  := $(B)/bin/fakegpu-create
CT_COMMON_OBJ := $(OBJ)/common/fg_devices.o $(OBJ)/common/fg_driver.o $(OBJ)/common/fg_table.o \
                 $(OBJ)/common/fg_sha256.o $(OBJ)/common/fg_log.o $(OBJ)/common/fg_mig.o

all: $(CT_BIN)

$(OBJ)/container/%.o: container/%.c | $(GEN)/fg_contract.h $(GEN)/fg_versions.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Icontainer -c $< -o $@

$(CT_BIN): $(CT_OBJ) $(CT_COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ -ldl

PROCFS_BIN := $(B)/bin/fakegpu-procfs

all: $(PROCFS_BIN)

$(PROCFS_BIN): $(OBJ)/container/procfs_main.o $(OBJ)/container/procfs.o $(CT_COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ -ldl
