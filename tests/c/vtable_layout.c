/*
 * Prints the byte offset of every field of DipuVendorVTable, and its size,
 * as a C compiler lays out the header it is built against: one
 * "name offset" line each, then "sizeof size". The field list is ABI
 * major 1 as it was frozen in tests/c/abi1/dipu_vendor.h.
 */
#include "dipu_vendor.h"

#include <stddef.h>
#include <stdio.h>

#define FIELD(f) printf("%s %zu\n", #f, offsetof(DipuVendorVTable, f));

int main(void) {
  FIELD(abi_major)
  FIELD(struct_size)
  FIELD(private_data)
  FIELD(release)
  FIELD(describe)
  FIELD(device_count)
  FIELD(current_device)
  FIELD(set_device)
  FIELD(synchronize_device)
  FIELD(device_properties)
  FIELD(memory_info)
  FIELD(malloc)
  FIELD(free)
  FIELD(malloc_host)
  FIELD(free_host)
  FIELD(memset)
  FIELD(memset_async)
  FIELD(memcpy)
  FIELD(memcpy_async)
  FIELD(memcpy_peer)
  FIELD(memcpy_peer_async)
  FIELD(stream_priority_range)
  FIELD(stream_create)
  FIELD(stream_destroy)
  FIELD(stream_synchronize)
  FIELD(stream_query)
  FIELD(stream_wait_event)
  FIELD(launch_host_func)
  FIELD(event_create)
  FIELD(event_destroy)
  FIELD(event_record)
  FIELD(event_query)
  FIELD(event_synchronize)
  FIELD(event_elapsed_ms)
  FIELD(comm_get_unique_id)
  FIELD(comm_init_rank)
  FIELD(comm_destroy)
  FIELD(comm_abort)
  FIELD(comm_async_error)
  FIELD(all_reduce)
  FIELD(broadcast)
  FIELD(all_gather)
  FIELD(reduce_scatter)
  FIELD(reduce)
  FIELD(send)
  FIELD(recv)
  FIELD(group_start)
  FIELD(group_end)
  FIELD(vmm_granularity)
  FIELD(vmm_reserve)
  FIELD(vmm_free_reservation)
  FIELD(vmm_create)
  FIELD(vmm_release)
  FIELD(vmm_map)
  FIELD(vmm_unmap)
  FIELD(version_full)
  printf("sizeof %zu\n", sizeof(DipuVendorVTable));
  return 0;
}
