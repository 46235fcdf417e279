/* What the wide passes share (wide.c with AVX-512, wide_avx2.c with AVX2): a vector's lanes
 * as numbers in memory, and the scalar steps taken beside the vector loop
 * (pipelines/csrc/jpegcheck/group.c). */
#ifndef FASTLOAD_JPEGCHECK_GROUP_H
#define FASTLOAD_JPEGCHECK_GROUP_H

#include <stdint.h>

#include "lanes.h"

#define GROUP_MAX 16                    /* lanes in a vector at most (16 x 32 bits) */
#define NEAR ((int64_t)1 << 30)         /* the most a table may lie from base */

/* What does not change while a vector's lanes run, in memory */
typedef struct {
    int64_t data[GROUP_MAX];     /* each lane's data */
    int32_t blocks[GROUP_MAX];   /* blocks per MCU */
    int32_t ends[GROUP_MAX];     /* where the interval (or the data) ends, in bits */
    int32_t dc[2][GROUP_MAX], ac[2][GROUP_MAX]; /* its two pairs of tables, from base */
    int32_t second[GROUP_MAX];   /* the blocks that use the second pair (a bit each) */
    int32_t restarts[GROUP_MAX]; /* -1 where its scan has restart intervals, else 0 */
    EntropyLane *lane[GROUP_MAX];
} GroupFixed;

/* What changes, as the vector's registers are stored */
typedef struct {
    int32_t pos[GROUP_MAX], k[GROUP_MAX], block[GROUP_MAX], mcus[GROUP_MAX], to_go[GROUP_MAX];
} GroupNumbers;

/* Before a wide pass: every lane at a block's AC (a block's end, or the start, the scalar
 * way first). Returns whether a lane is done (then the pass does not run). */
int group_start(EntropyLane *const *lanes, int n);

/* f and numbers for lanes[0..n) (n <= GROUP_MAX), the other lanes empty (data of zeros,
 * inactive); returns the active lanes, a bit each */
unsigned group_in(GroupFixed *f, GroupNumbers *numbers, EntropyLane *const *lanes, int n,
                  const uint8_t *base);

/* Each lane of special (a bit each) moved on the slow way where a vector step left it (those
 * of slow: an AC symbol the look-up does not hold; the others: the DC's, or the MCU's end),
 * numbers updated. Returns the lanes that are done (a bit each). */
unsigned group_settle(GroupFixed *f, GroupNumbers *numbers, unsigned special, unsigned slow);

/* The active lanes' numbers back into their EntropyLanes */
void group_out(const GroupFixed *f, const GroupNumbers *numbers, unsigned active);

#endif
